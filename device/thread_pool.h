// The compute thread pool of the CPU device. One pool per device, sized to the cores (no
// oversubscription: the caller's thread is one of the workers). Workers spin briefly between
// jobs, then sleep, so a decode step's hundreds of small parallel regions stay cheap while an
// idle pool costs nothing.
//
// Thread-safety: run() may be called by one thread at a time (the device's owner).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace chorus {

class ThreadPool {
 public:
  // n_threads <= 0 means one per core. The calling thread counts as one of them.
  explicit ThreadPool(int n_threads = 0);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_threads_; }

  // Calls fn(task, thread) for task in [0, n_tasks), spread over the threads; returns when
  // all calls have returned. thread is in [0, size()).
  void run(int64_t n_tasks, const std::function<void(int64_t task, int thread)>& fn);

 private:
  void worker(int index);
  void work(int thread);

  int n_threads_;
  std::vector<std::thread> threads_;
  std::mutex mu_;
  std::condition_variable wake_;
  std::atomic<uint64_t> generation_{0};
  std::atomic<int64_t> next_task_{0};
  std::atomic<int> busy_{0};
  std::atomic<bool> stop_{false};
  int64_t n_tasks_ = 0;
  const std::function<void(int64_t, int)>* fn_ = nullptr;
};

}  // namespace chorus
