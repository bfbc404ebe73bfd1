# SPDX-License-Identifier: Apache-2.0
# libtutti as a package: `cmake --install` puts the public headers, the shared library and the
# tutti command line under the prefix, with a pkg-config file (tutti.pc) and a CMake package
# (find_package(tutti) gives the target tutti::tutti). The Python wheel installs the same tree
# inside its package directory (scikit-build-core sets SKBUILD), so the install is relocatable:
# both files find the prefix from where they lie, and so does the tutti program its library.
include(CMakePackageConfigHelpers)

set(tutti_cmake_dir ${CMAKE_INSTALL_LIBDIR}/cmake/tutti)
set(tutti_pc_dir ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
if(IS_ABSOLUTE "${CMAKE_INSTALL_LIBDIR}" OR IS_ABSOLUTE "${CMAKE_INSTALL_INCLUDEDIR}" OR
	IS_ABSOLUTE "${CMAKE_INSTALL_BINDIR}")
	message(FATAL_ERROR "tutti: CMAKE_INSTALL_LIBDIR, CMAKE_INSTALL_INCLUDEDIR and "
		"CMAKE_INSTALL_BINDIR must be relative to the prefix (the installed tutti.pc, CMake "
		"package and tutti program are relocatable)")
endif()

# The tutti program links libtutti.so and finds it relative to itself ($ORIGIN/../lib, or
# wherever LIBDIR is from BINDIR), under any prefix and inside the wheel's package directory,
# with no LD_LIBRARY_PATH; the build tree's program keeps CMake's run path to the build tree.
file(RELATIVE_PATH tutti_bin_to_lib "/prefix/${CMAKE_INSTALL_BINDIR}" "/prefix/${CMAKE_INSTALL_LIBDIR}")
set_target_properties(tutti_cli PROPERTIES INSTALL_RPATH "\$ORIGIN/${tutti_bin_to_lib}")

install(TARGETS tutti EXPORT tuttiTargets LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(TARGETS tutti_cli RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(DIRECTORY include/tutti DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
	FILES_MATCHING PATTERN "*.h")

# pkg-config: the prefix is found from the .pc file's own directory.
file(RELATIVE_PATH tutti_pc_to_prefix "/prefix/${tutti_pc_dir}" "/prefix")
string(REGEX REPLACE "/$" "" tutti_pc_to_prefix "${tutti_pc_to_prefix}")
# A pip-installed library is on no loader path: programs built against it record where it is.
if(SKBUILD)
	set(tutti_pc_rpath "-Wl,-rpath,\${libdir} ")
else()
	set(tutti_pc_rpath "")
endif()
configure_file(cmake/tutti.pc.in ${CMAKE_CURRENT_BINARY_DIR}/tutti.pc @ONLY)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/tutti.pc DESTINATION ${tutti_pc_dir})

# CMake: find_package(tutti [VERSION]) -> tutti::tutti. Before 1.0 a minor release may change the
# ABI, so only the same minor version is compatible (the soname says the same).
install(EXPORT tuttiTargets NAMESPACE tutti:: DESTINATION ${tutti_cmake_dir})
configure_package_config_file(cmake/tuttiConfig.cmake.in
	${CMAKE_CURRENT_BINARY_DIR}/tuttiConfig.cmake INSTALL_DESTINATION ${tutti_cmake_dir})
if(PROJECT_VERSION_MAJOR EQUAL 0)
	set(tutti_compat SameMinorVersion)
else()
	set(tutti_compat SameMajorVersion)
endif()
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/tuttiConfigVersion.cmake
	VERSION ${PROJECT_VERSION} COMPATIBILITY ${tutti_compat})
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/tuttiConfig.cmake
	${CMAKE_CURRENT_BINARY_DIR}/tuttiConfigVersion.cmake DESTINATION ${tutti_cmake_dir})
