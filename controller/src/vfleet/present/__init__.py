"""Tables, plots and the report, for people."""
