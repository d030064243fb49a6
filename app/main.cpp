// SPDX-License-Identifier: MIT
// kvscope: the headless command line. Each command lives in its own cmd_*.cpp; this file only
// assembles them and turns errors into one line on stderr and an exit code:
//   0 success, 1 runtime failure (bad file, failed run), 2 usage error (bad flags or arguments).
#include "cli_common.h"

#include "core/util/error.h"
#include "core/util/memory.h"
#include "core/util/threads.h"
#include "core/util/version.h"

#include <iostream>

int main(int argc, char** argv) {
    using namespace kvscope;
    ensurePassiveOpenMpWait(argv);
    keepFreedMemoryForReuse();
    CLI::App app{"kvscope: inspect the KV cache of open LLMs (Qwen2/2.5, Llama, Qwen3) - headless CLI"};
    app.require_subcommand(1);
    app.set_version_flag("--version", [] {
        cli::applyThreads(0);
        return "kvscope " + kvscopeVersion() + "\nlibtorch " + libtorchVersion() + " (" + libtorchLibraryPath() + ")" +
               "\ndevice " + deviceSummary();
    });
    cli::addGenerateCommand(app);
    cli::addLogitsCommand(app);
    cli::addTokenizeCommands(app);
    cli::addMakeTestModelCommand(app);
    cli::addBenchCommand(app);
    cli::addCacheCommands(app);
    cli::addExperimentCommands(app);
    cli::addDemoCommands(app);
    cli::addFetchCommand(app);
    cli::addTrajectoryCommands(app);

    if (argc > 1 && argv[1][0] != '-' &&
        app.get_subcommands([&](CLI::App* c) { return c->get_name() == argv[1]; }).empty()) {
        std::cerr
            << "kvscope: error: unknown command '" << argv[1]
            << "' (commands: generate, logits, tokenize, detokenize, make-test-model, bench, cache, continue, "
               "run, report, audit, compare, ledger, train-demo-model, demo, fetch, import, replay; see --help)\n";
        return 2;
    }
    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
        if (e.get_exit_code() == 0) return app.exit(e);  // --help, --version
        std::cerr << "kvscope: error: " << e.what() << " (see --help)\n";
        return 2;
    } catch (const ExitStatus& e) {
        return e.code();
    } catch (const UsageError& e) {
        std::cerr << "kvscope: error: " << e.what() << "\n";
        return 2;
    } catch (const Cancelled& e) {
        std::cerr << "kvscope: " << e.what() << "\n";
        return 130;
    } catch (const Error& e) {
        std::cerr << "kvscope: error: " << e.what() << "\n";
        return 1;
    } catch (const c10::Error& e) {
        std::cerr << "kvscope: libtorch error: " << e.what_without_backtrace() << "\n";
        return 1;
    } catch (const std::exception& e) {
        std::cerr << "kvscope: error: " << e.what() << "\n";
        return 1;
    }
    return 0;
}
