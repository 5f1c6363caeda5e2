// `chorus trace FILE [--html OUT.html]`: a trace written by --trace, summarized, and its timeline
// page (engine/step/timeline.h).
#include <cstdio>
#include <fstream>
#include <sstream>

#include "apps/chorus/commands.h"
#include "engine/step/timeline.h"

namespace chorus::app {

int run_trace(const TraceArgs& args) {
  std::ifstream in(args.file, std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "chorus trace: cannot open %s\n", args.file.c_str());
    return 2;
  }
  std::stringstream text;
  text << in.rdbuf();
  const std::string json = text.str();
  if (args.html.empty()) {
    auto summary = summarize_trace(json);
    if (!summary) {
      std::fprintf(stderr, "chorus trace: %s: %s\n", args.file.c_str(), summary.error().message.c_str());
      return 2;
    }
    std::fputs(describe(*summary).c_str(), stdout);
    return 0;
  }
  std::string title = args.title;
  if (title.empty()) title = args.file.substr(args.file.find_last_of('/') + 1);
  TimelineSummary summary;
  auto page = timeline_html(json, title, &summary);
  if (!page) {
    std::fprintf(stderr, "chorus trace: %s: %s\n", args.file.c_str(), page.error().message.c_str());
    return 2;
  }
  std::fputs(describe(summary).c_str(), stdout);
  std::ofstream out(args.html, std::ios::binary | std::ios::trunc);
  out << *page;
  out.close();
  if (!out) {
    std::fprintf(stderr, "chorus trace: cannot write %s\n", args.html.c_str());
    return 2;
  }
  std::printf("timeline written to %s (%zu bytes): open it in a browser\n", args.html.c_str(), page->size());
  return 0;
}

}  // namespace chorus::app
