"""Past boots: the history screens and the changed-since strip."""
