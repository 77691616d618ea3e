"""The console's widgets; each renders only the data it is given."""
