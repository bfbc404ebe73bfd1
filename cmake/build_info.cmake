# SPDX-License-Identifier: Apache-2.0
# What this build holds, said the same way by the CLI (`tutti --version`) and by the Python
# wheel (tutti/_build.py, read at import): the version and whether the CUDA data path is in.
if(TUTTI_HAVE_CUDA)
	string(REPLACE ";" " " tutti_cuda_archs "${CMAKE_CUDA_ARCHITECTURES}")
	set(tutti_build_desc "CUDA ${CMAKE_CUDA_COMPILER_VERSION}, architectures ${tutti_cuda_archs}")
	set(tutti_build_cuda True)
else()
	set(tutti_build_desc "CPU build: no CUDA")
	set(tutti_build_cuda False)
endif()
target_compile_definitions(tutti_cli PRIVATE "TUTTI_BUILD_DESC=\"${tutti_build_desc}\"")

if(SKBUILD)
	configure_file(cmake/tutti_build.py.in ${CMAKE_CURRENT_BINARY_DIR}/tutti_build.py @ONLY)
	install(FILES ${CMAKE_CURRENT_BINARY_DIR}/tutti_build.py DESTINATION . RENAME _build.py)
endif()
