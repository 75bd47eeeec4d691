# runtime/coord: the pure parts (the client itself is tested against a real
# stintd in tests/integration/coord_client_test.cc).
stint_test(unit coord_client_parts_test)
