# Real signals, a forked child, and examples/preemption end to end.
stint_test(integration preemption_watcher_test)
if(TARGET preemption_example)
  add_dependencies(preemption_watcher_test preemption_example)
  target_compile_definitions(preemption_watcher_test
    PRIVATE STINT_PREEMPTION_EXAMPLE="$<TARGET_FILE:preemption_example>")
endif()
