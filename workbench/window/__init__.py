"""The main window's parts: the tab and answer names, the preset menus and the
Run / Stop / Kill control (mixins of workbench.main_window.MainWindow)."""
