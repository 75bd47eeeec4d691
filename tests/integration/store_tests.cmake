# stintd's SQLite store on real files: a second process for the lock test
# and the kill -9 test (store_child), and store_bench, a measurement that is
# not a test (Save transactions per second on this disk).
if(TARGET stintd_store)
  add_executable(store_child integration/store_child.cc)
  target_link_libraries(store_child PRIVATE stintd_store)

  stint_test(integration store_test)
  target_link_libraries(store_test PRIVATE stintd_store SQLite::SQLite3)
  add_dependencies(store_test store_child)
  target_compile_definitions(store_test PRIVATE STINT_STORE_CHILD="$<TARGET_FILE:store_child>")

  add_executable(store_bench integration/store_bench.cc)
  target_link_libraries(store_bench PRIVATE stintd_store stint_testutil)
endif()
