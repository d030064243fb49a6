// SPDX-License-Identifier: MIT
#pragma once
// Where kvscope's shipped data lives (the demo model, experiment files), so the same binary works
// from a build tree and from an installed package. Candidates, in order:
//   $KVSCOPE_DATA_DIR                      (explicit override)
//   <executable's folder>/../share/kvscope (installed: /usr/bin/kvscope -> /usr/share/kvscope)
//   the source tree the binary was built from
#include <string>
#include <vector>

namespace kvscope {

std::vector<std::string> dataDirCandidates();
// The first candidate that holds `relative` (e.g. "experiments/demo.toml"); throws UsageError
// listing every place it looked.
std::string findDataFile(const std::string& relative);
// Per-user data folder: $XDG_DATA_HOME/kvscope, else ~/.local/share/kvscope (not created here).
std::string userDataDir();
// Per-user cache folder (fetched models, generated bench models): $XDG_CACHE_HOME/kvscope, else
// ~/.cache/kvscope (not created here).
std::string userCacheDir();

}  // namespace kvscope
