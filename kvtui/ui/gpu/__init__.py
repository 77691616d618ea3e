"""The GPU panel: summary, bars, history plot, process table."""
