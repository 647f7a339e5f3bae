// Global functions available to every template: jinja2's range, namespace, dict, cycler and
// joiner, and the
// two Hugging Face transformers adds, raise_exception and strftime_now.
#include <ctime>

#include "engine/chat_template/builtins.h"
#include "engine/chat_template/ops.h"

namespace pagoda::jinja {
namespace {

Value g_range(CallArgs& a) {
  int64_t v[3] = {0, 0, 1};
  for (const Value& x : a.pos)
    if (x.kind != Kind::Int && x.kind != Kind::Bool)
      throw ChatTemplateError(std::string("range: expected integers, not ") + x.type_name());
  if (a.pos.size() == 1) v[1] = a.pos[0].i;
  else if (a.pos.size() == 2 || a.pos.size() == 3) {
    v[0] = a.pos[0].i;
    v[1] = a.pos[1].i;
    if (a.pos.size() == 3) v[2] = a.pos[2].i;
  } else {
    throw ChatTemplateError("range: expected 1 to 3 arguments");
  }
  if (v[2] == 0) throw ChatTemplateError("range: step must not be zero");
  // Count without overflow, then refuse big ranges as jinja2's sandbox does.
  __int128 span = v[2] > 0 ? (__int128)v[1] - v[0] : (__int128)v[0] - v[1];
  __int128 step = v[2] > 0 ? v[2] : -(__int128)v[2];
  __int128 n = span <= 0 ? 0 : (span + step - 1) / step;
  if (n > kMaxRange) throw ChatTemplateError("range too big: the limit is " + std::to_string(kMaxRange) + " items");
  std::vector<Value> out;
  for (int64_t k = 0; k < static_cast<int64_t>(n); ++k) out.push_back(Value::integer(v[0] + k * v[2]));
  return Value::make_list(std::move(out));
}

Value g_namespace(CallArgs& a) {
  Value ns = Value::make_dict();
  ns.dict->flavor = Dict::Flavor::Namespace;
  for (const Value& init : a.pos) {
    if (!init.is_dict()) throw ChatTemplateError("namespace: positional argument must be a mapping");
    for (const auto& [k, v] : init.dict->items) ns.dict->set(k, v);
  }
  for (const auto& [k, v] : a.kw) ns.dict->set(Value::string(k), v);
  return ns;
}

Value g_dict(CallArgs& a) {
  Value d = Value::make_dict();
  for (const auto& [k, v] : a.kw) d.dict->set(Value::string(k), v);
  return d;
}

// cycler(*items): .next() returns the current item and moves on (wrapping), .current is the
// item next() returns next, .reset() goes back to the first. An attribute object (namespace
// flavoured, so that its methods are plain attributes); the methods hold it weakly (no cycle).
Value g_cycler(CallArgs& a) {
  if (a.pos.empty()) throw ChatTemplateError("cycler: at least one item is required");
  Value c = Value::make_dict();
  c.dict->flavor = Dict::Flavor::Namespace;
  auto items = std::make_shared<std::vector<Value>>(a.pos);
  auto pos = std::make_shared<size_t>(0);
  std::weak_ptr<Dict> self = c.dict;
  c.dict->set(Value::string("items"), Value::make_list(*items, true));
  c.dict->set(Value::string("current"), (*items)[0]);
  c.dict->set(Value::string("next"), Value::function("cycler.next", [items, pos, self](CallArgs&) {
    Value v = (*items)[*pos];
    *pos = (*pos + 1) % items->size();
    if (auto d = self.lock()) d->set(Value::string("current"), (*items)[*pos]);
    return v;
  }));
  c.dict->set(Value::string("reset"), Value::function("cycler.reset", [items, pos, self](CallArgs&) {
    *pos = 0;
    if (auto d = self.lock()) d->set(Value::string("current"), (*items)[0]);
    return Value::none();
  }));
  return c;
}

// joiner(sep=", "): a callable that returns "" the first time and `sep` after that.
Value g_joiner(CallArgs& a) {
  std::string sep = a.get(0, "sep", Value::string(", ")).str();
  auto used = std::make_shared<bool>(false);
  return Value::function("joiner", [sep, used](CallArgs&) {
    if (!*used) {
      *used = true;
      return Value::string("");
    }
    return Value::string(sep);
  });
}

Value g_raise_exception(CallArgs& a) {
  throw ChatTemplateError("raise_exception: " + a.get(0, "message").str());
}

}  // namespace

Value make_globals(const std::optional<std::tm>& now) {
  Value g = Value::make_dict();
  g.dict->set(Value::string("range"), Value::function("range", g_range));
  g.dict->set(Value::string("namespace"), Value::function("namespace", g_namespace));
  g.dict->set(Value::string("dict"), Value::function("dict", g_dict));
  g.dict->set(Value::string("cycler"), Value::function("cycler", g_cycler));
  g.dict->set(Value::string("joiner"), Value::function("joiner", g_joiner));
  g.dict->set(Value::string("raise_exception"), Value::function("raise_exception", g_raise_exception));
  g.dict->set(Value::string("strftime_now"), Value::function("strftime_now", [now](CallArgs& a) {
    std::tm tm{};
    if (now) {
      tm = *now;
      timegm(&tm);  // normalises the fields and fills in the weekday and day of the year
    } else {
      std::time_t t = std::time(nullptr);
      localtime_r(&t, &tm);
    }
    std::string fmt = a.get(0, "format").str();
    if (fmt.empty()) return Value::string("");
    std::string buf(256 + fmt.size() * 16, '\0');
    size_t n = std::strftime(buf.data(), buf.size(), fmt.c_str(), &tm);
    buf.resize(n);
    return Value::string(buf);
  }));
  return g;
}

}  // namespace pagoda::jinja
