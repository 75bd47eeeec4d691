# Real training runs with kills, through the example programs.
if(TARGET resumable_training)
  add_executable(preempt_resume_test e2e/preempt_resume_test.cc)
  target_link_libraries(preempt_resume_test PRIVATE stint stint_testutil GTest::gtest GTest::gtest_main)
  target_compile_definitions(preempt_resume_test PRIVATE STINT_TRAIN_BINARY="$<TARGET_FILE:resumable_training>")
  add_dependencies(preempt_resume_test resumable_training)
  gtest_discover_tests(preempt_resume_test DISCOVERY_TIMEOUT 60 PROPERTIES LABELS e2e TIMEOUT 600)
endif()

# Elastic data-parallel training over Gloo with a real stintd: kills, joins.
if(TARGET elastic_training AND TARGET stintd)
  add_executable(elastic_test e2e/elastic_test.cc)
  target_link_libraries(elastic_test PRIVATE stint_stintdtest GTest::gtest GTest::gtest_main)
  target_compile_definitions(elastic_test PRIVATE STINT_ELASTIC_BINARY="$<TARGET_FILE:elastic_training>"
                                                  STINTD_PATH="$<TARGET_FILE:stintd>")
  add_dependencies(elastic_test elastic_training stintd)
  gtest_discover_tests(elastic_test DISCOVERY_TIMEOUT 60 PROPERTIES LABELS e2e TIMEOUT 300)
endif()
