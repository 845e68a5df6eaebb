"""Test and bench support code that is not part of the product: the start-up records
(`kvcases`) and the measured serving runs (`perfcases`) as vfleet requests. tests/ is on
sys.path (tests/conftest.py), so they import as `support.kvcases` and `support.perfcases`;
the bench scripts put tests/ on sys.path themselves. Nothing under controller/ imports them."""
