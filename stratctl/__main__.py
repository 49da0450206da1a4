from stratctl.cli.entry import main

main()
