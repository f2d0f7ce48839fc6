# Included by the install tests (install_package.cmake, own_model.cmake)
# after they set test_name: checks the -D variables every one needs, makes
# WORK_DIR afresh, installs BUILD_DIR into WORK_DIR/prefix, and defines
# step(), which runs a command and fails the test naming it.

foreach(var BUILD_DIR SOURCE_DIR WORK_DIR CXX_COMPILER)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "${test_name}: -D${var}=... is required")
  endif()
endforeach()

set(prefix "${WORK_DIR}/prefix")
set(build "${WORK_DIR}/build")
file(REMOVE_RECURSE "${WORK_DIR}")
file(MAKE_DIRECTORY "${WORK_DIR}")

function(step name)
  execute_process(COMMAND ${ARGN}
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${test_name}: ${name} failed (${rc}):\n"
                        "${out}\n${err}")
  endif()
  message(STATUS "${test_name}: ${name}: ok")
  set(step_output "${out}${err}" PARENT_SCOPE)
endfunction()

step("cmake --install"
     "${CMAKE_COMMAND}" --install "${BUILD_DIR}" --prefix "${prefix}")
