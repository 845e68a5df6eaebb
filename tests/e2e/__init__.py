"""The deploy end-to-end tests: a package, so that its one deployment is torn down when they
finish rather than at the end of the whole session."""
