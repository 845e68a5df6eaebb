"""Code the tests share, one package: pytest.ini puts tests/ on sys.path (`pythonpath`), so
every test folder, the benchmarks (PYTHONPATH=tests) and the helpers themselves import it as
`support.<module>`. Nothing here is collected: no module is named test_*.py."""
