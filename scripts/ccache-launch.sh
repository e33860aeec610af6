#!/usr/bin/env bash
# The compiler launcher of set-up's builds (scripts/setup.sh, step 3): ccache, after removing the precompiled
# header that the command is about to write, if one is there. CMake builds X.hxx.gch by compiling X.hxx.cxx
# with -include X.hxx, and GCC then reads the old X.hxx.gch beside X.hxx; ccache hashes what GCC reads, so the
# new header's key held the old one's bytes, which differ from build to build. A .gch rebuilt in a build
# folder that had one (a torch or pch.h change, a branch switch) missed the cache, and so did every file built
# with it: 25 minutes on 2 cores for a build whose every file was in the cache (ccache issue 1196). Without the
# old .gch the key is the headers' text, the same in every clone.
#   scripts/ccache-launch.sh COMPILER ARGS...   (the environment carries ccache's settings)
out="" prev=""
for arg in "$@"; do
  [ "$prev" = -o ] && out=$arg
  prev=$arg
done
case $out in
  *.gch) rm -f -- "$out" ;;
esac
exec ccache "$@"
