# pytest for the Python bindings (tests/python/test_*.py), one ctest test per
# file so `ctest -j` runs them side by side. Each runs the venv's pytest
# against the module in the build tree ($STINT_PYTHON_PATH, see conftest.py).
if(TARGET stint_python)
  execute_process(COMMAND "${STINT_PYTHON_EXECUTABLE}" -c "import pytest"
                  RESULT_VARIABLE _stint_no_pytest OUTPUT_QUIET ERROR_QUIET)
  if(_stint_no_pytest)
    # Loud, not silently missing: the suite is part of the default run.
    add_test(NAME python.pytest_missing
             COMMAND ${CMAKE_COMMAND} -E echo
                     "pytest is not installed in ${STINT_PYTHON_EXECUTABLE}: run tools/setup.sh")
    set_tests_properties(python.pytest_missing PROPERTIES WILL_FAIL TRUE LABELS python)
  else()
    file(MAKE_DIRECTORY ${CMAKE_BINARY_DIR}/pytest-tmp)  # pytest makes only the last level
    file(GLOB _stint_pytest_files CONFIGURE_DEPENDS ${CMAKE_CURRENT_LIST_DIR}/test_*.py)
    set(_stint_pytest_env "STINT_PYTHON_PATH=${STINT_PYTHON_PATH}")
    if(TARGET stintd)  # test_elastic.py runs a real one; skipped without it
      list(APPEND _stint_pytest_env "STINTD_PATH=$<TARGET_FILE:stintd>")
    endif()
    foreach(_file IN LISTS _stint_pytest_files)
      get_filename_component(_name "${_file}" NAME_WE)
      add_test(NAME python.${_name}
               COMMAND "${STINT_PYTHON_EXECUTABLE}" -m pytest -q -p no:cacheprovider
                       --basetemp=${CMAKE_BINARY_DIR}/pytest-tmp/${_name} "${_file}"
               WORKING_DIRECTORY ${CMAKE_CURRENT_LIST_DIR})
      set_tests_properties(python.${_name} PROPERTIES
        ENVIRONMENT "${_stint_pytest_env}"
        LABELS python
        TIMEOUT 600)
    endforeach()
  endif()
endif()
