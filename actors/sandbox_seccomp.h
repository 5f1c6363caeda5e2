// The seccomp filter a sandboxed tool runs under (actors/sandbox.cpp hands it to bubblewrap).
#pragma once

namespace chorus {

// What a tool has no business doing refuses with EPERM: mounts, namespaces, ptrace and other
// processes' memory, kernel modules and kexec, bpf, keyrings, perf, userfaultfd, reboot, swap.
// clone3 says ENOSYS (its flags cannot be checked; libc falls back to clone, whose are). The
// compiled program, in a memfd (-1: libseccomp refused to build it).
int sandbox_seccomp_program();

}  // namespace chorus
