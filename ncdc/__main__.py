from ncdc.cli import main

main()
