# Real training runs with kills, through the example programs.
if(TARGET resumable_training)
  add_executable(preempt_resume_test e2e/preempt_resume_test.cc)
  target_link_libraries(preempt_resume_test PRIVATE stint stint_testutil GTest::gtest GTest::gtest_main)
  target_compile_definitions(preempt_resume_test PRIVATE STINT_TRAIN_BINARY="$<TARGET_FILE:resumable_training>")
  add_dependencies(preempt_resume_test resumable_training)
  gtest_discover_tests(preempt_resume_test DISCOVERY_TIMEOUT 60 PROPERTIES LABELS e2e TIMEOUT 600)
endif()
