#include "dicom/lockdown.h"

#include <seccomp.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace ranzcr {

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define RANZCR_ASAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__)
#define RANZCR_ASAN 1
#endif

std::string limit_decoder_memory(int64_t memory_bytes) {
#ifdef RANZCR_ASAN
  // AddressSanitizer reserves terabytes of shadow address space: the fuzz build's helper bounds nothing
  // (libFuzzer's -rss_limit_mb bounds the fuzzed decode, which runs in the fuzzer's own process).
  (void)memory_bytes;
  return {};
#endif
  const rlimit memory{static_cast<rlim_t>(memory_bytes), static_cast<rlim_t>(memory_bytes)};
  if (::setrlimit(RLIMIT_AS, &memory) != 0)
    return "setrlimit(RLIMIT_AS) failed: " + std::string(std::strerror(errno));
  const rlimit no_core{0, 0};
  if (::setrlimit(RLIMIT_CORE, &no_core) != 0)
    return "setrlimit(RLIMIT_CORE) failed: " + std::string(std::strerror(errno));
  return {};
}

std::string lock_down_decoder(int fd, int sink) {
  if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0)
    return "prctl(PR_SET_NO_NEW_PRIVS) failed: " + std::string(std::strerror(errno));
  scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_KILL_PROCESS);
  if (!ctx) return "seccomp_init failed";
  const auto fd_arg = static_cast<scmp_datum_t>(fd);
  const auto self = static_cast<scmp_datum_t>(::getpid());
  int rc = 0;
  const auto allow = [&](int call) {
    if (rc == 0) rc = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, call, 0);
  };
  // Argument 0 equal to `value` (SCMP_A0 leaves a field to the compiler's zero-fill, which clang warns of).
  const auto first_arg_is = [](scmp_datum_t value) { return scmp_arg_cmp{0, SCMP_CMP_EQ, value, 0}; };
  if (rc == 0) rc = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(read), 1, first_arg_is(fd_arg));
  if (rc == 0) rc = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(write), 1, first_arg_is(fd_arg));
  if (rc == 0)
    rc = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(write), 1,
                          first_arg_is(static_cast<scmp_datum_t>(sink)));
  if (rc == 0) rc = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(tgkill), 1, first_arg_is(self));
  for (int call : {SCMP_SYS(mmap), SCMP_SYS(munmap), SCMP_SYS(mremap), SCMP_SYS(mprotect), SCMP_SYS(madvise),
                   SCMP_SYS(brk), SCMP_SYS(futex), SCMP_SYS(clock_gettime), SCMP_SYS(gettimeofday),
                   SCMP_SYS(getpid), SCMP_SYS(gettid), SCMP_SYS(rt_sigprocmask), SCMP_SYS(rt_sigaction),
                   SCMP_SYS(rt_sigreturn), SCMP_SYS(exit), SCMP_SYS(exit_group)})
    allow(call);
  if (rc == 0) rc = seccomp_load(ctx);
  seccomp_release(ctx);
  if (rc != 0) return "installing the seccomp filter failed: " + std::string(std::strerror(-rc));
  return {};
}

}  // namespace ranzcr
