"""Reading a running deployment: /metrics per served model and doctor's diagnosis."""
