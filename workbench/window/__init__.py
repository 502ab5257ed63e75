"""The main window's parts: the controllers MainWindow owns (presets, run_control, fork,
export), what they are given of the window (hooks), and the tab and answer names."""
