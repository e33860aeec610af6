// What ranzcr-dicom-decoder gives up before it reads a byte of a file (data/dicom_sandbox.h).
#pragma once

#include <cstdint>
#include <string>

namespace ranzcr {

/// Bounds this process's address space to `memory_bytes` (RLIMIT_AS) and forbids core dumps (RLIMIT_CORE 0).
/// Returns "" or what failed.
std::string limit_decoder_memory(int64_t memory_bytes);

/// Locks the calling (single-threaded) process down: PR_SET_NO_NEW_PRIVS, then a seccomp filter that kills
/// the process (SIGSYS) on every system call except read and write on `fd`, write on `sink` (the caller
/// makes it /dev/null: its stderr, where codecs print), memory management (mmap,
/// munmap, mremap, mprotect, madvise, brk), futex, the clock, signals to itself (what abort() needs) and
/// exit. No open, no exec, no socket, no ptrace, no new limits. Returns "" or what failed; nothing can be
/// undone after it returns "".
std::string lock_down_decoder(int fd, int sink);

}  // namespace ranzcr
