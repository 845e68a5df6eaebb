"""How vfleet reads what users and tools hand it: files read as bytes first (size, encoding,
duplicate keys, NaN), the strict pydantic base every boundary model derives from, the
one-line error for the first problem, and the value rules several files share. It imports
nothing else of vfleet but its errors, so every package can stand on it."""
