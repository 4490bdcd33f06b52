from kiln.app import main

main()
