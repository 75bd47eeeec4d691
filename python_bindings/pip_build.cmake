# What a pip build (pyproject.toml: scikit-build-core, which sets SKBUILD and
# Python_EXECUTABLE to the interpreter running pip) needs before LibTorch is
# looked for. Included by the top-level CMakeLists.txt; does nothing in a
# plain CMake build.
#
# The module links the very torch it will run with, so the LibTorch found
# must be the one of that interpreter's torch (torch.utils.cmake_prefix_path),
# ahead of the project's .venv and anything else. A build without it (an
# isolated pip build: no torch) stops here, saying what to do, instead of
# producing a wheel with no stint._C.
if(NOT SKBUILD)
  return()
endif()

execute_process(
  COMMAND "${Python_EXECUTABLE}" -c "import torch.utils; print(torch.utils.cmake_prefix_path)"
  OUTPUT_VARIABLE _stint_pip_torch_prefix OUTPUT_STRIP_TRAILING_WHITESPACE
  ERROR_VARIABLE _stint_pip_torch_error ERROR_STRIP_TRAILING_WHITESPACE
  RESULT_VARIABLE _stint_pip_torch_rc)
if(NOT _stint_pip_torch_rc EQUAL 0)
  message(FATAL_ERROR
    "stint: building the Python package needs torch importable by ${Python_EXECUTABLE}:\n"
    "${_stint_pip_torch_error}\n"
    "Install torch (and pybind11, scikit-build-core) into that environment first, then run "
    "`pip install --no-build-isolation .`: the module must link the torch it runs with.")
endif()
list(PREPEND CMAKE_PREFIX_PATH "${_stint_pip_torch_prefix}")
message(STATUS "stint: pip build against the torch of ${Python_EXECUTABLE} (${_stint_pip_torch_prefix})")

# At the end of the configure step: the wheel is pointless without the module.
function(_stint_require_python_module)
  if(NOT TARGET stint_python)
    message(FATAL_ERROR "stint: the Python module is not part of this build (LibTorch "
                        "${STINT_HAVE_TORCH}, see the 'stint:' lines above); the wheel would have "
                        "no stint._C")
  endif()
endfunction()
cmake_language(DEFER DIRECTORY "${CMAKE_SOURCE_DIR}" CALL _stint_require_python_module)
