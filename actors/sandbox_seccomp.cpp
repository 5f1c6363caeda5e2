#include "actors/sandbox_seccomp.h"

#include <sched.h>
#include <seccomp.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <initializer_list>

namespace chorus {

int sandbox_seccomp_program() {
  scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);
  if (!ctx) return -1;
  bool ok = true;
  for (const char* name : {"mount",
                           "umount2",
                           "pivot_root",
                           "chroot",
                           "unshare",
                           "setns",
                           "ptrace",
                           "process_vm_readv",
                           "process_vm_writev",
                           "kexec_load",
                           "kexec_file_load",
                           "init_module",
                           "finit_module",
                           "delete_module",
                           "bpf",
                           "keyctl",
                           "add_key",
                           "request_key",
                           "perf_event_open",
                           "userfaultfd",
                           "open_by_handle_at",
                           "reboot",
                           "swapon",
                           "swapoff",
                           "acct",
                           "quotactl",
                           "fsopen",
                           "fsmount",
                           "move_mount",
                           "open_tree"}) {
    const int nr = seccomp_syscall_resolve_name(name);
    if (nr != __NR_SCMP_ERROR) ok = ok && seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), nr, 0) == 0;
  }
  constexpr uint64_t kNewNamespaces = CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET |
                                      CLONE_NEWIPC | CLONE_NEWUTS | CLONE_NEWCGROUP;
  for (uint64_t flag = 1; flag != 0; flag <<= 1)
    if (flag & kNewNamespaces)
      ok = ok && seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(clone), 1,
                                  SCMP_A0(SCMP_CMP_MASKED_EQ, flag, flag)) == 0;
  ok = ok && seccomp_rule_add(ctx, SCMP_ACT_ERRNO(ENOSYS), SCMP_SYS(clone3), 0) == 0;
  const int fd = ok ? ::memfd_create("chorus-seccomp", MFD_CLOEXEC) : -1;
  if (fd >= 0 && (seccomp_export_bpf(ctx, fd) != 0 || ::lseek(fd, 0, SEEK_SET) != 0)) {
    ::close(fd);
    seccomp_release(ctx);
    return -1;
  }
  seccomp_release(ctx);
  return fd;
}

}  // namespace chorus
