// The `pagoda` subcommands. Each returns the process exit code; argv[0] is the subcommand.
#pragma once

namespace pagoda::cli {

int serve(int argc, char** argv);          // server/cli/cmd_serve.cpp
int generate(int argc, char** argv);       // server/cli/cmd_generate.cpp
int bench(int argc, char** argv);          // server/cli/cmd_bench.cpp
int make_model(int argc, char** argv);     // server/cli/cmd_make_model.cpp
int quantize(int argc, char** argv);       // server/cli/cmd_quantize.cpp
int tokenize(int argc, char** argv);       // server/cli/cmd_tokenize.cpp
int chat_template(int argc, char** argv);  // server/cli/cmd_chat_template.cpp
int structured(int argc, char** argv);     // server/cli/cmd_structured.cpp

}  // namespace pagoda::cli
