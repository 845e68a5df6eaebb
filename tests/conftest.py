"""Shared by every test folder: pytest puts this folder on sys.path, so `ci_gate` and the
support packages next to it (kv_oracle) import from any test module."""
