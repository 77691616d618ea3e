"""The server log: the virtual view (cursor, marks, filters, drawing), its panel and its line window."""
