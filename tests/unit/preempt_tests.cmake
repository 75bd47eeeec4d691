stint_test(unit preemption_plan_test)
