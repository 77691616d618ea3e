"""The fleet screen and its virtual table."""
