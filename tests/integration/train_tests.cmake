# examples/train_mlp resumed from a checkpoint must end where one uninterrupted run ends.
if(TARGET train_mlp)
  stint_test(integration train_resume_test)
  target_compile_definitions(train_resume_test PRIVATE STINT_TRAIN_MLP="$<TARGET_FILE:train_mlp>")
  add_dependencies(train_resume_test train_mlp)
endif()
