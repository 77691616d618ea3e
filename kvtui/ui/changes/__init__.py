"""Flag edits, rollback, restart and tune from the console: the pane's change controller and its banner."""
