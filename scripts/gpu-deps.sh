# SPDX-License-Identifier: Apache-2.0
# shellcheck shell=bash
# Sourced by the GPU scripts (gpu-run.sh, gpu-ab.sh) from the repository root: libraries the GPU
# machine lacks (liburing, libxxhash, cmocka), given as Debian packages in .debs/, unpacked into a
# private prefix, build/deps, and put on pkg-config's and the loader's paths. Nothing without
# .debs/.
if ls .debs/*.deb >/dev/null 2>&1; then
	prefix=$PWD/build/deps
	mkdir -p "$prefix"
	for d in .debs/*.deb; do dpkg -x "$d" "$prefix"; done
	# Point the packages' .pc files at the prefix rather than setting PKG_CONFIG_SYSROOT_DIR,
	# which pkg-config would also prepend to every other .pc file's paths (tutti.pc's among them,
	# as installed by the install test).
	sed -E -i "s#(=|-L|-I)/usr#\1$prefix/usr#g" "$prefix"/usr/lib/x86_64-linux-gnu/pkgconfig/*.pc
	export PKG_CONFIG_PATH=$prefix/usr/lib/x86_64-linux-gnu/pkgconfig
	export LD_LIBRARY_PATH=$prefix/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
fi
