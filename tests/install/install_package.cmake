# cmake -DBUILD_DIR=... -DSOURCE_DIR=... -DWORK_DIR=... -DCXX_COMPILER=...
#       -P install_package.cmake
#
# Installs BUILD_DIR into WORK_DIR/prefix, builds the evaluator role
# example against that prefix alone in WORK_DIR/build, and runs it.

set(test_name install_package)
include("${CMAKE_CURRENT_LIST_DIR}/install_steps.cmake")

# What an outside project needs is there.
require_installed(include/syncfac/actors/cluster_member.hpp
                  include/syncfac/actors/metrics_sink.hpp
                  include/syncfac/messages/atoms.hpp
                  include/syncfac/kernels/backend.hpp
                  include/syncfac/actors/program_config.hpp
                  include/syncfac/runtime/base/error.hpp
                  lib/libsyncfac.a
                  lib/cmake/syncfac/syncfacConfig.cmake
                  lib/cmake/syncfac/syncfacConfigVersion.cmake
                  lib/cmake/syncfac/syncfacTargets.cmake
                  lib/cmake/syncfac/FindCAF.cmake)
file(GLOB_RECURSE sources "${prefix}/include/*.cpp")
if(sources)
  message(FATAL_ERROR "install_package: sources installed: ${sources}")
endif()

# The outside project: only the installed prefix, never the source tree.
build_installed_example(evaluator_role)
# Its compile lines name the installed headers and not the source tree's.
string(FIND "${step_output}" "${prefix}/include/syncfac" at_prefix)
if(at_prefix EQUAL -1)
  message(FATAL_ERROR "install_package: the build does not use "
                      "${prefix}/include/syncfac:\n${step_output}")
endif()
foreach(dir actors messages kernels runtime)
  string(FIND "${step_output}" "-I${SOURCE_DIR} " in_tree)
  string(FIND "${step_output}" "-I${SOURCE_DIR}/${dir}" in_tree_dir)
  if(NOT in_tree EQUAL -1 OR NOT in_tree_dir EQUAL -1)
    message(FATAL_ERROR "install_package: the build includes the source "
                        "tree:\n${step_output}")
  endif()
endforeach()

step("run syncfac_evaluator --help" "${build}/syncfac_evaluator" --help)
string(FIND "${step_output}" "eval_every_steps" has_flag)
if(has_flag EQUAL -1)
  message(FATAL_ERROR "install_package: unexpected --help:\n${step_output}")
endif()
execute_process(COMMAND "${build}/syncfac_evaluator" --cluster
                        "${WORK_DIR}/no-such-cluster.json"
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(rc EQUAL 0 OR NOT "${out}${err}" MATCHES "no-such-cluster.json")
  message(FATAL_ERROR "install_package: a missing cluster file should fail "
                      "naming it (${rc}):\n${out}${err}")
endif()
message(STATUS "install_package: the installed package builds and runs "
               "the evaluator role")
