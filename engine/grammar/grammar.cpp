#include "engine/grammar/grammar.h"

#include <functional>
#include <optional>

namespace chorus {

namespace {

// Longest repetition spelled out as rules (a string's maxLength, an array's maxItems).
constexpr int64_t kMaxRepeat = 4096;

std::string set_to_string(const ByteSet& s) {
  auto put = [](std::string& o, int c) {
    if (c >= 0x21 && c < 0x7f && c != '\\' && c != ']' && c != '-' && c != '^') {
      o += static_cast<char>(c);
    } else {
      static const char* hex = "0123456789ABCDEF";
      o += "\\x";
      o += hex[c >> 4];
      o += hex[c & 15];
    }
  };
  if (s.count() == 1)
    for (int c = 0; c < 256; ++c)
      if (s.test(static_cast<size_t>(c))) {
        std::string o = "\"";
        if (c == '"')
          o += "\\\"";
        else
          put(o, c);
        return o + "\"";
      }
  std::string o = "[";
  for (int c = 0; c < 256;) {
    if (!s.test(static_cast<size_t>(c))) {
      ++c;
      continue;
    }
    int e = c;
    while (e + 1 < 256 && s.test(static_cast<size_t>(e + 1))) ++e;
    put(o, c);
    if (e > c) {
      o += '-';
      put(o, e);
    }
    c = e + 1;
  }
  return o + "]";
}

}  // namespace

std::string Grammar::to_string() const {
  std::string o;
  for (size_t r = 0; r < alts_.size(); ++r) {
    o += names_[r] + " ::=";
    for (size_t a = 0; a < alts_[r].size(); ++a) {
      if (a > 0) o += " |";
      bool empty = true;
      for (uint32_t i = alts_[r][a]; elems_[i].kind != Kind::end; ++i) {
        empty = false;
        o += ' ';
        o += elems_[i].kind == Kind::bytes ? set_to_string(sets_[static_cast<size_t>(elems_[i].arg)])
                                           : names_[static_cast<size_t>(elems_[i].arg)];
      }
      if (empty) o += " \"\"";
    }
    o += '\n';
  }
  return o;
}

GrammarBuilder::Elem GrammarBuilder::byte(uint8_t c) {
  Elem e;
  e.bytes.set(c);
  return e;
}

GrammarBuilder::Elem GrammarBuilder::bytes(ByteSet s) {
  Elem e;
  e.bytes = s;
  return e;
}

GrammarBuilder::Elem GrammarBuilder::ref(int32_t rule) {
  Elem e;
  e.is_rule = true;
  e.rule = rule;
  return e;
}

GrammarBuilder::Seq GrammarBuilder::literal(std::string_view s) {
  Seq q;
  for (char c : s) q.push_back(byte(static_cast<uint8_t>(c)));
  return q;
}

ByteSet GrammarBuilder::range(uint8_t lo, uint8_t hi) {
  ByteSet s;
  for (int c = lo; c <= hi; ++c) s.set(static_cast<size_t>(c));
  return s;
}

int32_t GrammarBuilder::declare(std::string name) {
  rules_.push_back(Rule{std::move(name), {}, false});
  return static_cast<int32_t>(rules_.size() - 1);
}

void GrammarBuilder::define(int32_t rule, std::vector<Seq> alts) {
  Rule& r = rules_[static_cast<size_t>(rule)];
  r.alts = std::move(alts);
  r.defined = true;
}

int32_t GrammarBuilder::add(std::string name, std::vector<Seq> alts) {
  const int32_t r = declare(std::move(name));
  define(r, std::move(alts));
  return r;
}

int32_t GrammarBuilder::repeat(std::string name, const Seq& item, int64_t min, int64_t max) {
  if (min < 0) min = 0;
  if (min > kMaxRepeat || (max >= 0 && max - min > kMaxRepeat)) {
    // Left undefined, so that build() refuses it by name.
    return declare(name + " (a repetition of more than " + std::to_string(kMaxRepeat) + ")");
  }
  Seq head;
  for (int64_t i = 0; i < min; ++i) head.insert(head.end(), item.begin(), item.end());
  if (max >= 0 && max == min) return add(std::move(name), {head});
  int32_t tail;
  if (max < 0) {
    tail = declare(name + "-more");
    Seq more = item;
    more.push_back(ref(tail));
    define(tail, {more, Seq{}});
  } else {
    tail = add(name + "-opt1", {item, Seq{}});
    for (int64_t k = 2; k <= max - min; ++k) {
      Seq more = item;
      more.push_back(ref(tail));
      tail = add(name + "-opt" + std::to_string(k), {more, Seq{}});
    }
  }
  head.push_back(ref(tail));
  return add(std::move(name), {head});
}

Result<Grammar> GrammarBuilder::build(int32_t root) const {
  const size_t n = rules_.size();
  auto bad = [](const std::string& m) { return make_error(Errc::invalid_argument, m); };
  if (root < 0 || static_cast<size_t>(root) >= n) return bad("grammar: no root rule");
  for (const Rule& r : rules_) {
    if (!r.defined) return bad("grammar: rule '" + r.name + "' is used but never defined");
    for (const Seq& s : r.alts)
      for (const Elem& e : s)
        if (e.is_rule && (e.rule < 0 || static_cast<size_t>(e.rule) >= n))
          return bad("grammar: rule '" + r.name + "' refers to a rule that does not exist");
  }
  // 2. Productive rules, to a fixpoint: an alternative is productive when all its references are.
  std::vector<bool> productive(n, false), nullable(n, false);
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t r = 0; r < n; ++r) {
      bool p = false, z = false;
      for (const Seq& s : rules_[r].alts) {
        bool sp = true, sz = true;
        for (const Elem& e : s) {
          sp = sp && (e.is_rule ? productive[static_cast<size_t>(e.rule)] : e.bytes.any());
          sz = sz && e.is_rule && nullable[static_cast<size_t>(e.rule)];
        }
        p = p || sp;
        z = z || sz;
      }
      if (p != productive[r] || z != nullable[r]) {
        productive[r] = productive[r] || p;
        nullable[r] = nullable[r] || z;
        changed = true;
      }
    }
  }
  for (size_t r = 0; r < n; ++r)
    if (!productive[r])
      return bad("grammar: rule '" + rules_[r].name +
                 "' derives no finite text (it has no alternatives, or every one recurses without end)");
  // 3. Left recursion: rules reached at an alternative's start (past nullable rules).
  std::vector<int> mark(n, 0);  // 0 unseen, 1 on the path, 2 done
  std::function<std::optional<Error>(size_t)> visit = [&](size_t r) -> std::optional<Error> {
    mark[r] = 1;
    for (const Seq& s : rules_[r].alts)
      for (const Elem& e : s) {
        if (!e.is_rule) break;
        const auto c = static_cast<size_t>(e.rule);
        if (mark[c] == 1)
          return bad("grammar: rule '" + rules_[c].name + "' can reach itself without consuming text");
        if (mark[c] == 0)
          if (auto err = visit(c)) return err;
        if (!nullable[c]) break;
      }
    mark[r] = 2;
    return std::nullopt;
  };
  for (size_t r = 0; r < n; ++r)
    if (mark[r] == 0)
      if (auto err = visit(r)) return *err;

  Grammar g;
  g.root_ = root;
  g.alts_.resize(n);
  for (size_t r = 0; r < n; ++r) {
    g.names_.push_back(rules_[r].name);
    for (const Seq& s : rules_[r].alts) {
      g.alts_[r].push_back(static_cast<uint32_t>(g.elems_.size()));
      for (const Elem& e : s) {
        if (e.is_rule) {
          g.elems_.push_back({Grammar::Kind::rule, e.rule});
        } else {
          g.elems_.push_back({Grammar::Kind::bytes, static_cast<int32_t>(g.sets_.size())});
          g.sets_.push_back(e.bytes);
        }
      }
      g.elems_.push_back({Grammar::Kind::end, 0});
    }
  }
  return g;
}

}  // namespace chorus
