// Tool sandboxes: a tool that hangs, floods output, forks, detaches or writes outside its
// directory gets a clear result, and nothing of it is left afterwards.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "actors/sandbox.h"

namespace chorus {
namespace {

namespace fs = std::filesystem;

// A test of a layer of isolation this machine lacks fails, naming what is missing: an escape test
// that skips passes where the sandbox holds nothing. It skips only where that was asked for —
// CHORUS_SANDBOX=plain (bubblewrap turned off: the suite's plain run, sandbox_plain) or
// CHORUS_TEST_WITHOUT_ISOLATION=1 (a machine where the missing layer cannot be had; README, Tests).
bool isolation_waived(const char* what) {
  const char* plain = std::getenv("CHORUS_SANDBOX");
  const char* waive = std::getenv("CHORUS_TEST_WITHOUT_ISOLATION");
  return (plain && std::string(plain) == "plain" && std::string(what) == "bubblewrap") ||
         (waive && std::string(waive) == "1");
}
#define CHORUS_REQUIRE_ISOLATION(present, what)                                                       \
  if (!(present)) {                                                                                   \
    if (isolation_waived(what)) GTEST_SKIP() << "no " << (what) << " here: " << Sandbox::isolation(); \
    FAIL() << "no " << (what) << " here: " << Sandbox::missing_isolation()                            \
           << " (CHORUS_TEST_WITHOUT_ISOLATION=1 skips this test)";                                   \
  }

// Processes whose command line contains `marker` (the tests tag their commands with one).
int processes_with(const std::string& marker) {
  int n = 0;
  DIR* d = opendir("/proc");
  for (dirent* e; d && (e = readdir(d)) != nullptr;) {
    if (!std::isdigit(static_cast<unsigned char>(e->d_name[0]))) continue;
    std::ifstream f(std::string("/proc/") + e->d_name + "/cmdline");
    std::string cmd((std::istreambuf_iterator<char>(f)), {});
    std::replace(cmd.begin(), cmd.end(), '\0', ' ');
    if (cmd.find(marker) != std::string::npos && cmd.find("gtest") == std::string::npos) ++n;
  }
  if (d) closedir(d);
  return n;
}

class SandboxTest : public ::testing::Test {
 protected:
  void SetUp() override {
    base_ = fs::temp_directory_path() / ("chorus-sandbox-test-" + std::to_string(::getpid()));
    auto s = Sandbox::create(base_.string(), "prog-1");
    ASSERT_TRUE(s.ok()) << s.error().to_string();
    box_ = std::make_unique<Sandbox>(std::move(*s));
    std::printf("isolation: %s\n", Sandbox::isolation().c_str());
  }
  void TearDown() override {
    if (listener_ >= 0) ::close(listener_);
    box_.reset();
    fs::remove_all(base_);
  }
  ToolResult sh(const std::string& script, SandboxLimits lim = {}, const std::string& input = "") {
    auto r = box_->run({"sh", "-c", script}, lim, input);
    EXPECT_TRUE(r.ok()) << r.error().to_string();
    return r.ok() ? *r : ToolResult{};
  }
  bool bubblewrap() const { return Sandbox::isolation().rfind("bubblewrap", 0) == 0; }
  // A port listening on this machine's loopback (closed with the test), and a tool script that
  // connects to it and prints "connected" ("" when no port could be had).
  std::string loopback_connect() {
    listener_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::bind(listener_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(listener_, 1) != 0)
      return "";
    socklen_t len = sizeof a;
    ::getsockname(listener_, reinterpret_cast<sockaddr*>(&a), &len);
    return "python3 -c \"import socket; socket.create_connection(('127.0.0.1', " +
           std::to_string(ntohs(a.sin_port)) + "), timeout=2); print('connected')\"";
  }

  fs::path base_;
  std::unique_ptr<Sandbox> box_;
  int listener_ = -1;
};

TEST_F(SandboxTest, RunsInItsOwnDirectoryAndKeepsFilesBetweenRuns) {
  ToolResult r = sh("pwd; echo hello > note.txt; cat -", {}, "from stdin\n");
  EXPECT_TRUE(r.ok()) << r.describe() << ": " << r.output;
  EXPECT_EQ(r.output, box_->dir() + "\nfrom stdin\n");
  EXPECT_EQ(sh("cat note.txt").output, "hello\n");
  r = sh("exit 3");
  EXPECT_EQ(r.exit_code, 3);
  EXPECT_EQ(r.describe(), "exited with status 3");
  auto missing = box_->run({"no-such-command-chorus"});
  ASSERT_TRUE(missing.ok());
  EXPECT_EQ(missing->exit_code, 127);
}

TEST_F(SandboxTest, AHangingToolIsKilledAtItsTimeout) {
  SandboxLimits lim;
  lim.timeout_s = 0.5;
  ToolResult r = sh("echo started; sleep 30 # chorus-hang-marker", lim);
  EXPECT_TRUE(r.timed_out);
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.output, "started\n");  // what it wrote before is kept
  EXPECT_LT(r.seconds, 3.0);
  EXPECT_NE(r.describe().find("timed out after 0."), std::string::npos) << r.describe();
  EXPECT_EQ(processes_with("chorus-hang-marker"), 0);
}

TEST_F(SandboxTest, FloodingOutputIsCutAndKilled) {
  SandboxLimits lim;
  lim.max_output_bytes = 64 << 10;
  ToolResult r = sh("yes chorus-flood-marker", lim);
  EXPECT_TRUE(r.output_truncated);
  EXPECT_EQ(r.output.size(), 64u << 10);
  EXPECT_LT(r.seconds, 5.0);
  EXPECT_EQ(r.describe(), "output went past the limit (killed)");
  EXPECT_EQ(processes_with("chorus-flood-marker"), 0);
}

// Filling the disk through the work dir: killed soon after the cap, the directory emptied (so
// nothing of it stays on the host's disk), the next run fine; the same for too many files; and
// /tmp is a tmpfs of the same size.
TEST_F(SandboxTest, FillingItsDirectoryIsStoppedAndEmptied) {
  SandboxLimits lim;
  lim.max_dir_bytes = 8 << 20;
  ASSERT_TRUE(sh("echo kept > old.txt", lim).ok());
  ToolResult r = sh("i=0; while :; do head -c 1048576 /dev/zero > f$i || exit 3; i=$((i+1)); done", lim);
  EXPECT_TRUE(r.dir_full) << r.describe();
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.signal, 0);
  EXPECT_LT(r.seconds, 5.0);
  EXPECT_NE(r.describe().find("its directory went past"), std::string::npos) << r.describe();
  EXPECT_TRUE(fs::is_directory(box_->dir()));
  EXPECT_TRUE(fs::is_empty(box_->dir())) << "what it wrote stays on the host";
  r = sh("for i in $(seq 1 20000); do : > n$i; done; echo all", lim);
  EXPECT_TRUE(r.dir_full) << r.describe() << " " << r.output;
  EXPECT_TRUE(fs::is_empty(box_->dir()));
  r = sh("echo fine > new.txt && cat new.txt", lim);
  EXPECT_TRUE(r.ok()) << r.describe();
  EXPECT_EQ(r.output, "fine\n");
  if (bubblewrap()) {
    r = sh("head -c 16777216 /dev/zero > /tmp/big; echo status=$?; du -k /tmp/big | cut -f1", lim);
    EXPECT_TRUE(r.ok()) << r.describe();
    EXPECT_NE(r.output.find("No space left on device"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("status=1"), std::string::npos) << r.output;
    EXPECT_LE(std::stol(r.output.substr(r.output.rfind("status=1\n") + 9)), 8 * 1024) << r.output;
  }
}

TEST_F(SandboxTest, DetachedAndForkedProcessesDoNotOutliveTheRun) {
  // A tool that starts a daemon in a new session and returns at once.
  ToolResult r =
      sh("setsid sh -c 'sleep 300; true' chorus-detach-marker >/dev/null 2>&1 & "
         "sh -c 'sleep 300; true' chorus-bg-marker & echo started");
  EXPECT_EQ(r.output, "started\n");
  EXPECT_FALSE(r.timed_out);
  EXPECT_LT(r.seconds, 5.0);
  EXPECT_EQ(processes_with("chorus-detach-marker"), 0);
  EXPECT_EQ(processes_with("chorus-bg-marker"), 0);
}

TEST_F(SandboxTest, AForkBombHitsTheProcessCap) {
  CHORUS_REQUIRE_ISOLATION(Sandbox::isolation().find("+ pids cgroup") != std::string::npos, "a pids cgroup");
  SandboxLimits lim;
  lim.max_processes = 16;
  lim.timeout_s = 10;
  ToolResult r =
      sh("n=0; while [ $n -lt 200 ]; do sh -c 'sleep 30; true' chorus-fork-marker >/dev/null 2>&1 & "
         "n=$((n+1)); done; echo forks-done",
         lim);
  // The shell is refused a fork past the cap and gives up (dash exits); what it started is gone.
  EXPECT_NE(r.output.find("Cannot fork"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("forks-done"), std::string::npos) << "200 processes must not have been possible";
  EXPECT_NE(r.exit_code, 0);
  EXPECT_LT(r.seconds, 5.0);
  EXPECT_EQ(processes_with("chorus-fork-marker"), 0);
}

TEST_F(SandboxTest, WritingOutsideItsDirectoryFails) {
  CHORUS_REQUIRE_ISOLATION(bubblewrap(), "bubblewrap");
  // /var is not there at all; /usr is, read-only.
  const std::string outside = "/var/tmp/chorus-sandbox-escape-" + std::to_string(::getpid());
  ToolResult r = sh("echo x > " + outside);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("nonexistent"), std::string::npos) << r.output;  // dash: "Directory nonexistent"
  EXPECT_FALSE(fs::exists(outside));
  const std::string in_usr = "/usr/chorus-sandbox-escape-" + std::to_string(::getpid());
  r = sh("echo x > " + in_usr);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("Read-only file system"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(in_usr));
  // Its /tmp is its own and goes away with the run.
  EXPECT_TRUE(sh("echo y > /tmp/chorus-private && cat /tmp/chorus-private").ok());
  EXPECT_FALSE(fs::exists("/tmp/chorus-private"));
}

TEST_F(SandboxTest, NoNetwork) {
  CHORUS_REQUIRE_ISOLATION(bubblewrap(), "bubblewrap");
  // A port listening on this machine's loopback cannot be reached from inside.
  const std::string connect = loopback_connect();
  ASSERT_FALSE(connect.empty());
  ToolResult r = sh(connect);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_EQ(r.output.find("connected\n"), std::string::npos) << r.output;
}

// A tool whose arguments are hostile (the model writes them): each attempt fails, and the
// sandbox goes on serving runs after. The server's environment holds a secret; the host has
// /etc/shadow, /root and the model cache.
TEST_F(SandboxTest, AHostileToolSeesNothingOfTheHost) {
  CHORUS_REQUIRE_ISOLATION(bubblewrap(), "bubblewrap");
  ::setenv("CHORUS_TEST_SECRET", "hunter2-secret", 1);
  const char* home = std::getenv("HOME");
  const std::string cache = std::string(home ? home : "/root") + "/.cache";
  struct Attempt {
    const char* what;
    std::string script;
  };
  const std::vector<Attempt> attempts = {
      {"read /etc/shadow", "cat /etc/shadow"},
      {"list /root", "ls /root"},
      {"list the model cache", "ls " + cache},
      {"list /home", "ls /home"},
      {"read the project tree", "ls " + std::string(CHORUS_TOPOLOGIES_DIR)},
      {"be root", "test \"$(id -u)\" = 0"},
      {"find the secret in its environment", "env | grep hunter2"},
      {"find the secret in /proc/self/environ", "grep -a hunter2 /proc/self/environ"},
      {"find the secret in /proc/1/environ", "grep -a hunter2 /proc/1/environ"},
      {"see the host's processes", "test -e /proc/" + std::to_string(::getpid())},
      {"make a user namespace", "unshare -U true"},
      {"mount", "unshare -m sh -c 'mount -t tmpfs none /tmp'"},
      {"ptrace a sibling",
       "sleep 5 & python3 -c \"import ctypes,sys; l=ctypes.CDLL(None); "
       "sys.exit(0 if l.ptrace(16, int(sys.argv[1]), 0, 0) == 0 else 1)\" $!"},
      {"load a bpf program",
       "python3 -c \"import ctypes,sys; l=ctypes.CDLL(None); "
       "sys.exit(0 if l.syscall(321, 0, 0, 0) >= 0 else 1)\""},
  };
  for (const Attempt& a : attempts) {
    const ToolResult r = sh(a.script);
    EXPECT_NE(r.exit_code, 0) << a.what << " succeeded: " << r.output;
    EXPECT_EQ(r.output.find("hunter2"), std::string::npos) << a.what << ": " << r.output;
  }
  // What a tool does see: HOME at its directory, the tool PATH, and the system's commands.
  const ToolResult env = sh("echo \"$HOME|$PATH|$(id -u)\"; python3 -c 'print(6*7)'");
  EXPECT_TRUE(env.ok()) << env.output;
  EXPECT_EQ(env.output, box_->dir() + "|/usr/local/bin:/usr/bin:/bin|65534\n42\n");
  // No capabilities, no new privileges, the seccomp filter on (mode 2).
  const ToolResult status = sh("grep -E '^(CapEff|NoNewPrivs|Seccomp):' /proc/self/status");
  EXPECT_EQ(status.output, "CapEff:\t0000000000000000\nNoNewPrivs:\t1\nSeccomp:\t2\n");
  ::unsetenv("CHORUS_TEST_SECRET");
}

// A tool's opt-ins reach exactly what they name: a host path read-only or read-write, a
// variable, the host's network; without them, none of it.
TEST_F(SandboxTest, OptInsReachWhatTheyNameAndNothingElse) {
  CHORUS_REQUIRE_ISOLATION(bubblewrap(), "bubblewrap");
  const fs::path host = "/var/tmp/chorus-optin-" + std::to_string(::getpid());
  fs::create_directories(host);
  { std::ofstream(host / "data.txt") << "host data\n"; }
  const std::string read = "cat " + (host / "data.txt").string();
  const std::string write = "echo tool > " + (host / "out.txt").string();
  auto run = [&](const std::string& script, const SandboxAccess& access) {
    SandboxLimits lim;
    lim.access = access;
    return sh(script, lim);
  };
  EXPECT_NE(run(read, {}).exit_code, 0) << "read without opting in";
  SandboxAccess reads;
  reads.read = {host.string()};
  EXPECT_EQ(run(read, reads).output, "host data\n");
  const ToolResult ro = run(write, reads);
  EXPECT_NE(ro.exit_code, 0);
  EXPECT_NE(ro.output.find("Read-only file system"), std::string::npos) << ro.output;
  SandboxAccess writes;
  writes.write = {host.string()};
  EXPECT_TRUE(run(write, writes).ok());
  EXPECT_TRUE(fs::exists(host / "out.txt"));
  SandboxAccess missing;
  missing.read = {"/var/tmp/chorus-no-such-path"};
  SandboxLimits lim;
  lim.access = missing;
  auto refused = box_->run({"true"}, lim);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().code, Errc::not_found);
  fs::remove_all(host);

  SandboxAccess env;
  env.env = {"GREETING=hello", "LANG=C"};
  EXPECT_EQ(run("echo \"$GREETING $LANG\"", env).output, "hello C\n");

  const std::string connect = loopback_connect();
  ASSERT_FALSE(connect.empty());
  EXPECT_EQ(run(connect, {}).output.find("connected"), std::string::npos);
  SandboxAccess net;
  net.network = true;
  EXPECT_EQ(run(connect, net).output, "connected\n");
}

TEST_F(SandboxTest, DestroyRemovesEverything) {
  ASSERT_TRUE(sh("mkdir -p a/b && echo z > a/b/c").ok());
  const std::string dir = box_->dir();
  ASSERT_TRUE(fs::exists(dir + "/a/b/c"));
  EXPECT_TRUE(box_->destroy().ok());
  EXPECT_FALSE(fs::exists(dir));
  EXPECT_TRUE(box_->destroy().ok());  // again: nothing to do
  auto r = box_->run({"true"});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().message, "sandbox prog-1 is destroyed");
  EXPECT_FALSE(Sandbox::create(base_.string(), "../escape").ok());
}

// 1000 programs, each with its own sandbox that runs a tool (leaving a file and a background
// process behind) and is then destroyed: no directory, process or cgroup is left.
TEST(SandboxLifecycle, AThousandProgramsLeaveNothing) {
  const fs::path base = fs::temp_directory_path() / ("chorus-sandbox-1000-" + std::to_string(::getpid()));
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < 1000; ++i) {
    auto box = Sandbox::create(base.string(), "program-" + std::to_string(i));
    ASSERT_TRUE(box.ok()) << box.error().to_string();
    auto r = box->run(
        {"sh", "-c", "echo data > out.txt; sh -c 'sleep 60; true' chorus-thousand-marker >/dev/null 2>&1 &"});
    ASSERT_TRUE(r.ok());
    ASSERT_EQ(r->exit_code, 0) << r->output;
    ASSERT_TRUE(box->destroy().ok());
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("1000 sandboxes created, run and destroyed in %.1f s (%s)\n", s, Sandbox::isolation().c_str());
  EXPECT_TRUE(fs::is_empty(base)) << "directories left in " << base;
  EXPECT_EQ(processes_with("chorus-thousand-marker"), 0);
  int cgroups = 0;
  for (const char* root : {"/sys/fs/cgroup/pids", "/sys/fs/cgroup"}) {
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(root, ec))
      cgroups += e.path().filename().string().rfind("chorus-" + std::to_string(::getpid()) + "-", 0) == 0;
  }
  EXPECT_EQ(cgroups, 0) << "cgroups left";
  fs::remove_all(base);
}

}  // namespace
}  // namespace chorus
