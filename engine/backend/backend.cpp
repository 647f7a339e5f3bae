// Backend's default memory query: host memory, for backends whose tensors live there.
#include "engine/backend/backend.h"

#include <unistd.h>

#include <fstream>
#include <string>

namespace pagoda {

MemoryInfo Backend::memory_info() const {
  MemoryInfo m;
  std::ifstream f("/proc/meminfo");
  std::string key, unit;
  size_t kb = 0;
  while (f >> key >> kb >> unit) {
    if (key == "MemAvailable:") m.free_bytes = kb * 1024;
    else if (key == "MemTotal:") m.total_bytes = kb * 1024;
    if (m.free_bytes > 0 && m.total_bytes > 0) break;  // the first lines; later ones may lack a unit
  }
  if (m.free_bytes == 0) {  // no /proc (or no MemAvailable): what sysconf knows
    const long pages = sysconf(_SC_AVPHYS_PAGES);
    const long page = sysconf(_SC_PAGESIZE);
    if (pages > 0 && page > 0) m.free_bytes = static_cast<size_t>(pages) * static_cast<size_t>(page);
  }
  return m;
}

}  // namespace pagoda
