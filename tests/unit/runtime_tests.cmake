stint_test(unit staging_pool_test)
