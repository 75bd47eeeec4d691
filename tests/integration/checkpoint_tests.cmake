stint_test(integration checkpointer_test)
stint_test(integration fault_test)

add_executable(crash_writer integration/crash_writer.cc)
target_link_libraries(crash_writer PRIVATE stint stint_testutil)
stint_test(integration kill_test)
add_dependencies(kill_test crash_writer)
target_compile_definitions(kill_test PRIVATE STINT_CRASH_WRITER="$<TARGET_FILE:crash_writer>")
stint_test(integration io_engine_test)
