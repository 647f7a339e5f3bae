// placeholder until the command is implemented
#include <cstdio>

#include "server/commands.h"

namespace pagoda::cli {
int tokenize(int, char**) {
  std::fprintf(stderr, "not implemented yet\n");
  return 1;
}
}  // namespace pagoda::cli
