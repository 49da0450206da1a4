from stratctl.cli.main import main

main()
