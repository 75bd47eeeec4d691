stint_test(unit sampler_test)
