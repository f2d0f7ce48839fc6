# Included by the install tests (install_package.cmake, own_model.cmake)
# after they set test_name: checks the -D variables every one needs, makes
# WORK_DIR afresh, installs BUILD_DIR into WORK_DIR/prefix, and defines
# step(), which runs a command and fails the test naming it,
# require_installed(), and build_installed_example().

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

# Fails the test unless each of the files (relative to the prefix) was
# installed.
function(require_installed)
  foreach(f ${ARGN})
    if(NOT EXISTS "${prefix}/${f}")
      message(FATAL_ERROR "${test_name}: ${prefix}/${f} was not installed")
    endif()
  endforeach()
endfunction()

# Configures and builds the project examples/<example> in `build` against
# the installed prefix alone, never the source tree; the build's verbose
# output (its compile lines) is left in step_output.
function(build_installed_example example)
  step("configure examples/${example}"
       "${CMAKE_COMMAND}" -S "${SOURCE_DIR}/examples/${example}"
       -B "${build}" -DCMAKE_BUILD_TYPE=Release
       "-DCMAKE_CXX_COMPILER=${CXX_COMPILER}"
       "-DCMAKE_PREFIX_PATH=${prefix}"
       "-Dsyncfac_DIR=${prefix}/lib/cmake/syncfac")
  step("build examples/${example}"
       "${CMAKE_COMMAND}" --build "${build}" -j 2 -- VERBOSE=1)
  set(step_output "${step_output}" PARENT_SCOPE)
endfunction()

step("cmake --install"
     "${CMAKE_COMMAND}" --install "${BUILD_DIR}" --prefix "${prefix}")
