// Every template x case of ../shared/testdata/chat-templates renders byte-for-byte as the
// Python jinja2 reference (expected/<template>/<case>.txt) or fails (<case>.error).
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "engine/chat_template/chat_template.h"
#include "tests/support/test_files.h"
#include "tests/support/testdata.h"

using pagoda::testing::read_file;

namespace fs = std::filesystem;
using pagoda::ChatTemplate;
using pagoda::ChatTemplateError;

namespace {

const fs::path kDir = fs::path(PAGODA_TESTDATA_DIR) / "chat-templates";

ChatTemplate::Inputs inputs_for(const nlohmann::ordered_json& c) {
  ChatTemplate::Inputs in;
  in.messages_ordered = c.at("messages");
  if (c.contains("tools")) in.tools_ordered = c.at("tools");
  in.add_generation_prompt = c.at("add_generation_prompt").get<bool>();
  in.bos_token = c.value("bos_token", "<s>");
  in.eos_token = c.value("eos_token", "</s>");
  in.now = pagoda::testing::chat_testdata_now();
  return in;
}

}  // namespace

TEST_CASE("every template x case matches the jinja2 reference", "[testdata]") {
  if (!pagoda::testing::testdata_available("chat-templates")) return;
  REQUIRE(fs::exists(kDir / "cases.json"));
  auto cases = nlohmann::ordered_json::parse(read_file(kDir / "cases.json"));
  int rendered = 0, failed_as_expected = 0, templates = 0;
  for (const auto& entry : fs::directory_iterator(kDir / "templates")) {
    if (entry.path().extension() != ".jinja") continue;
    ++templates;
    std::string name = entry.path().stem().string();
    ChatTemplate tmpl(read_file(entry.path()));
    for (const auto& c : cases) {
      std::string case_name = c.at("name").get<std::string>();
      fs::path base = kDir / "expected" / name / case_name;
      INFO(name << " / " << case_name);
      if (fs::exists(base.string() + ".txt")) {
        std::string expected = read_file(base.string() + ".txt");
        std::string got;
        REQUIRE_NOTHROW(got = tmpl.render(inputs_for(c)));
        CHECK(got == expected);
        rendered += got == expected;
      } else {
        REQUIRE(fs::exists(base.string() + ".error"));
        // The .error file holds Python's "ExceptionType: message"; ours must carry the message.
        std::string want = read_file(base.string() + ".error");
        want = want.substr(want.find(": ") + 2);
        while (!want.empty() && (want.back() == '\n' || want.back() == '\r')) want.pop_back();
        try {
          tmpl.render(inputs_for(c));
          FAIL("rendered without the expected error: " << want);
        } catch (const ChatTemplateError& e) {
          CHECK_THAT(e.what(), Catch::Matchers::Contains(want));
          ++failed_as_expected;
        }
      }
    }
  }
  CHECK(templates >= 10);  // testdata held 10 templates when this was written, 15 since
  CHECK(rendered + failed_as_expected == templates * static_cast<int>(cases.size()));
  WARN("rendered exactly: " << rendered << ", failed as expected: " << failed_as_expected);
}

TEST_CASE("one parsed template renders concurrently from several threads", "[testdata]") {
  if (!pagoda::testing::testdata_available("chat-templates")) return;
  auto cases = nlohmann::ordered_json::parse(read_file(kDir / "cases.json"));
  const ChatTemplate tmpl(read_file(kDir / "templates" / "NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use.jinja"));
  const nlohmann::ordered_json& c = cases.at(5);  // tool call: macros, namespaces, tojson
  const std::string expected = read_file(kDir / "expected" / "NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use" /
                                     (c.at("name").get<std::string>() + ".txt"));
  std::vector<int> good(4, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < 200; ++i) good[t] += tmpl.render(inputs_for(c)) == expected;
    });
  for (auto& th : threads) th.join();
  for (int g : good) CHECK(g == 200);
}

TEST_CASE("extra template variables (chat_template_kwargs) are in scope") {
  const ChatTemplate tmpl(
      "{% if enable_thinking is defined and enable_thinking is false %}no-think{% endif %}"
      "{{ documents|length }}{{ add_generation_prompt }}");
  ChatTemplate::Inputs in;
  in.variables = nlohmann::ordered_json::parse(R"({"enable_thinking": false, "documents": [1, 2], "add_generation_prompt": 7})");
  CHECK(tmpl.render(in) == "no-think2True");  // the standard names win over variables
  in.variables = nlohmann::ordered_json::array();
  CHECK_THROWS_AS(tmpl.render(in), ChatTemplateError);
}
