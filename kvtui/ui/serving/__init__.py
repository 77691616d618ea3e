"""Serving figures: the pane's live reader and its rows, banner and suggestion."""
