// SPDX-License-Identifier: MIT
// kvscope fetch NAME: a model of the catalog (core/model/catalog.h) into the user's cache, once.
#include "cli_common.h"

#include "core/model/catalog.h"
#include "core/util/error.h"
#include "core/util/resources.h"

#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <sys/wait.h>
#include <unistd.h>

namespace kvscope::cli {

std::string ensureCatalogModel(const CatalogModel& model) {
    const std::string path = catalogModelPath(model);
    if (std::filesystem::is_regular_file(path)) return path;
    // The fetch (download, SHA-256 checks, move into place) is scripts/fetch-model.sh's, which the
    // test data fetch shares; it prints its progress on stderr.
    const std::string script = findDataFile("scripts/fetch-model.sh");
    std::fprintf(stderr, "kvscope: fetching %s: %s\n", model.name.c_str(), model.description.c_str());
    std::fflush(stderr);
    const pid_t child = ::fork();
    if (child < 0) throw UsageError("cannot start " + script + " to fetch " + model.name);
    if (child == 0) {
        ::execlp("bash", "bash", script.c_str(), model.name.c_str(), path.c_str(), static_cast<char*>(nullptr));
        ::_exit(127);
    }
    int status = 0;
    while (::waitpid(child, &status, 0) < 0 && errno == EINTR) {}
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || !std::filesystem::is_regular_file(path))
        throw UsageError("fetching " + model.name + " failed (" + script + ", see above); nothing was written to " +
                         path);
    return path;
}

void addFetchCommand(CLI::App& app) {
    auto name = std::make_shared<std::string>();
    CLI::App* cmd = app.add_subcommand("fetch", "Download a real model of kvscope's catalog into the user's cache");
    std::string names;
    for (const CatalogModel& m : catalogModels()) names += "\n  " + m.name + ": " + m.description;
    cmd->footer("Models:" + names);
    cmd->add_option("name", *name, "Catalog name (e.g. smollm2)")->required();
    cmd->callback([name] { std::printf("%s\n", ensureCatalogModel(catalogModel(*name)).c_str()); });
}

}  // namespace kvscope::cli
