"""A cluster's own calibration of the estimator, fitted on its ledger (`vfleet calibrate`)."""
