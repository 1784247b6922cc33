# Installs libraries, headers, drivers and a relocatable CMake package so that
# downstream code can `find_package(ExaMoE)` and link ExaMoE::examoe.
include(CMakePackageConfigHelpers)

install(DIRECTORY ${CMAKE_SOURCE_DIR}/src/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/examoe
        FILES_MATCHING PATTERN "*.hpp")
install(FILES ${CMAKE_BINARY_DIR}/generated/examoe/core/version.hpp
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/examoe/core)
install(EXPORT ExaMoETargets NAMESPACE ExaMoE:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/ExaMoE)
configure_package_config_file(${CMAKE_SOURCE_DIR}/cmake/ExaMoEConfig.cmake.in
  ${CMAKE_BINARY_DIR}/ExaMoEConfig.cmake INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/ExaMoE)
write_basic_package_version_file(${CMAKE_BINARY_DIR}/ExaMoEConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_BINARY_DIR}/ExaMoEConfig.cmake ${CMAKE_BINARY_DIR}/ExaMoEConfigVersion.cmake
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/ExaMoE)

# The batch scripts, so that an installed ExaMoE (e.g. from Spack) submits
# with `sbatch <prefix>/share/examoe/batch/slurm-cpu.sbatch DECK`.
install(PROGRAMS ${CMAKE_SOURCE_DIR}/scripts/batch/slurm-cpu.sbatch ${CMAKE_SOURCE_DIR}/scripts/batch/slurm-gpu.sbatch
                 ${CMAKE_SOURCE_DIR}/scripts/batch/pbs-cpu.pbs
        DESTINATION ${CMAKE_INSTALL_DATADIR}/examoe/batch)

# The planner's cluster presets and scale models, so that an installed
# examoe-plan finds them: `examoe-plan DECK --cluster
# <prefix>/share/examoe/clusters/h100-sxm-ib400.toml`.
install(DIRECTORY ${CMAKE_SOURCE_DIR}/input/clusters/ DESTINATION ${CMAKE_INSTALL_DATADIR}/examoe/clusters
        FILES_MATCHING PATTERN "*.toml")
install(DIRECTORY ${CMAKE_SOURCE_DIR}/input/models/ DESTINATION ${CMAKE_INSTALL_DATADIR}/examoe/models
        FILES_MATCHING PATTERN "*.toml")
