"""The closed loop: what each deploy measured (the ledger) and the calibration fitted on it."""
