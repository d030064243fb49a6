// SPDX-License-Identifier: MIT
// kvscope-gui [LEDGER.db | MODEL_DIR | MODEL.gguf] [--item ID] [--screenshot FILE.png [--transplant]] [--version]
// With --screenshot the window opens the ledger, selects the item, waits until every view shows it,
// saves a picture of the window and exits (0 on success); it works offscreen.
#include "widgets/item_table_model.h"
#include "widgets/ledger_page.h"
#include "widgets/main_window.h"
#include "widgets/transplant_panel.h"

#include "core/util/memory.h"
#include "core/util/threads.h"
#include "core/util/version.h"

#include <QApplication>
#include <QCommandLineParser>
#include <QTimer>

#include <cstdio>

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

}  // namespace

int main(int argc, char** argv) {
    kvscope::ensurePassiveOpenMpWait(argv);
    kvscope::keepFreedMemoryForReuse();
    QApplication app(argc, argv);
    QApplication::setOrganizationName(QStringLiteral("kvscope"));
    QApplication::setApplicationName(QStringLiteral("kvscope"));
    QApplication::setApplicationVersion(QString::fromStdString(kvscope::kvscopeVersion()));
    QApplication::setDesktopFileName(QStringLiteral("io.github.kvscope.kvscope"));

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
    parser.process(app);

    if (parser.isSet(versionOption)) {
        kvscope::configureThreads(0);
        std::printf("kvscope-gui %s\nQt %s\nlibtorch %s\ndevice %s\n", kvscope::kvscopeVersion().c_str(), qVersion(),
                    kvscope::libtorchVersion().c_str(), kvscope::deviceSummary().c_str());
        return 0;
    }
    kvscope::configureThreads(0);
    const QStringList paths = parser.positionalArguments();
    const bool screenshot = parser.isSet(shotOption);
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
    if (parser.isSet(itemOption) && !window.selectItem(parser.value(itemOption))) {
        std::fprintf(stderr, "kvscope-gui: the ledger has no item '%s'\n", qPrintable(parser.value(itemOption)));
        if (screenshot) return 1;
    } else if (!parser.isSet(itemOption) && screenshot) {
        window.selectItem(defaultItem(*window.ledgerPage()->itemModel()));
    }
    if (screenshot) return takeScreenshot(app, window, parser.value(shotOption), parser.isSet(transplantOption));
    return app.exec();
}
