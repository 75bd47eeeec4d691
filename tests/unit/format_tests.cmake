# Pure format and naming tests: no processes, at most a temp directory.
stint_test(unit format_test)
stint_test(unit retention_test)
stint_test(unit commit_names_test)
