// SPDX-License-Identifier: MIT
// kvscope-gui [LEDGER.db | MODEL_DIR | MODEL.gguf] [--item ID] [--screenshot FILE.png [--transplant]] [--version]
// With --screenshot the window opens the ledger, selects the item, waits until every view shows it,
// saves a picture of the window and exits (0 on success); it works offscreen.
#include "widgets/item_table_model.h"
#include "widgets/ledger_page.h"
#include "widgets/main_window.h"
#include "widgets/trajectory_table_model.h"
#include "widgets/transplant_panel.h"

#include "core/util/memory.h"
#include "core/util/threads.h"
#include "core/util/version.h"

#include <QApplication>
#include <QCommandLineParser>
#include <QCoreApplication>
#include <QTimer>

#include <cstdio>
#include <cstdlib>

namespace {

using kvscope::widgets::MainWindow;

// Saves the window once the selected item's analysis is shown - and with `transplant`, once the
// transplant panel's default splice has run and its continuation is shown too (or fails after a timeout).
int takeScreenshot(QApplication& app, MainWindow& window, const QString& file, bool transplant) {
    int status = 1;
    auto save = [&] {
        QApplication::processEvents();
        window.grab().save(file) ? status = 0
                                 : std::fprintf(stderr, "kvscope-gui: cannot write %s\n", qPrintable(file));
        app.quit();
    };
    QObject::connect(&window, &MainWindow::analysisShown, &app, [&] {
        if (transplant)
            window.transplantPanel()->run();
        else
            QTimer::singleShot(200, &app, save);
    });
    QObject::connect(&window, &MainWindow::transplantShown, &app, [&] { QTimer::singleShot(200, &app, save); });
    QObject::connect(&window, &MainWindow::trajectoryShown, &app, [&] { QTimer::singleShot(200, &app, save); });
    QObject::connect(&window, &MainWindow::taskFailed, &app, [&](const QString& message) {
        std::fprintf(stderr, "kvscope-gui: %s\n", qPrintable(message));
        app.exit(1);
    });
    QTimer::singleShot(300000, &app, [&] {
        std::fprintf(stderr, "kvscope-gui: timed out waiting for the item's analysis\n");
        app.exit(1);
    });
    const int loop = app.exec();
    return loop != 0 ? loop : status;
}

// The first divergent item (the interesting picture), else the first item with a boundary.
QString defaultItem(const kvscope::widgets::ItemTableModel& items) {
    QString fallback;
    for (const auto& record : items.items()) {
        if (kvscope::widgets::item_results::divergent(record)) return QString::fromStdString(record.itemId);
        if (fallback.isEmpty() && record.status == kvscope::experiments::ItemStatus::Done)
            fallback = QString::fromStdString(record.itemId);
    }
    return fallback;
}

// An imported run's: the trajectory whose max |delta| on the page's basis is largest, else the first.
QString defaultTrajectory(const kvscope::widgets::TrajectoryTableModel& trajectories) {
    QString best;
    double largest = -1;
    for (int row = 0; row < trajectories.rowCount(); ++row) {
        const double max = trajectories.mismatch(row).maxAbsDelta.value_or(0.0);  // the table's, on its basis
        if (max > largest) {
            largest = max;
            best = QString::fromStdString(trajectories.record(row).itemId);
        }
    }
    return best;
}

// The command line, read before any window system is touched: --help and --version (and a bad
// option's message) work without a display.
struct GuiOptions {
    QStringList paths;
    QString item, screenshot;
    bool transplant = false;
};

GuiOptions parseCommandLine(const QCoreApplication& app) {
    QCommandLineParser parser;
    parser.setApplicationDescription(QStringLiteral("kvscope: live vs prefill KV caches, side by side"));
    parser.addHelpOption();
    const QCommandLineOption versionOption(QStringLiteral("version"), QStringLiteral("Print versions and exit"));
    const QCommandLineOption itemOption(QStringLiteral("item"), QStringLiteral("Select this item of the ledger"),
                                        QStringLiteral("ID"));
    const QCommandLineOption shotOption(QStringLiteral("screenshot"),
                                        QStringLiteral("Save the window to FILE.png and exit"),
                                        QStringLiteral("FILE.png"));
    const QCommandLineOption transplantOption(
        QStringLiteral("transplant"), QStringLiteral("With --screenshot: run the transplant panel's splice first"));
    parser.addOptions({versionOption, itemOption, shotOption, transplantOption});
    parser.addPositionalArgument(QStringLiteral("path"),
                                 QStringLiteral("A ledger (.db), a model folder or a GGUF file"),
                                 QStringLiteral("[LEDGER.db | MODEL_DIR | MODEL.gguf]"));
    parser.process(app);  // --help, and an unknown option, print and exit here
    if (parser.isSet(versionOption)) {
        kvscope::configureThreads(0);
        std::printf("kvscope-gui %s\nQt %s\nlibtorch %s\ndevice %s\n", kvscope::kvscopeVersion().c_str(), qVersion(),
                    kvscope::libtorchVersion().c_str(), kvscope::deviceSummary().c_str());
        std::exit(0);
    }
    return {parser.positionalArguments(), parser.value(itemOption), parser.value(shotOption),
            parser.isSet(transplantOption)};
}

void nameApplication() {
    QCoreApplication::setOrganizationName(QStringLiteral("kvscope"));
    QCoreApplication::setApplicationName(QStringLiteral("kvscope"));
    QCoreApplication::setApplicationVersion(QString::fromStdString(kvscope::kvscopeVersion()));
}

}  // namespace

int main(int argc, char** argv) {
    kvscope::ensurePassiveOpenMpWait(argv);
    kvscope::keepFreedMemoryForReuse();
    GuiOptions options;
    {
        const QCoreApplication commandLine(argc, argv);
        nameApplication();
        options = parseCommandLine(commandLine);
    }
    QApplication app(argc, argv);
    nameApplication();
    QApplication::setDesktopFileName(QStringLiteral("io.github.kvscope.kvscope"));
    kvscope::configureThreads(0);
    const QStringList& paths = options.paths;
    const bool screenshot = !options.screenshot.isEmpty();
    if (paths.size() > 1) {
        std::fprintf(stderr, "kvscope-gui: give one ledger or model folder (got %lld paths)\n",
                     static_cast<long long>(paths.size()));
        return 2;
    }
    if (screenshot && paths.isEmpty()) {
        std::fprintf(stderr, "kvscope-gui: --screenshot needs a ledger to show\n");
        return 2;
    }

    MainWindow window;
    window.setProperty("noDialogs", screenshot);
    window.resize(1600, 1000);
    window.show();
    if (!paths.isEmpty()) {
        QString error;
        if (!window.openPath(paths.front(), &error)) {
            std::fprintf(stderr, "kvscope-gui: %s\n", qPrintable(error));
            if (screenshot) return 1;
        }
    }
    if (!options.item.isEmpty() && !window.selectItem(options.item)) {
        std::fprintf(stderr, "kvscope-gui: the ledger has no item '%s'\n", qPrintable(options.item));
        if (screenshot) return 1;
    } else if (options.item.isEmpty() && screenshot) {
        const kvscope::widgets::LedgerPage& page = *window.ledgerPage();
        window.selectItem(page.showsImportedRun() ? defaultTrajectory(*page.trajectoryModel())
                                                  : defaultItem(*page.itemModel()));
    }
    if (screenshot) return takeScreenshot(app, window, options.screenshot, options.transplant);
    return app.exec();
}
